"""`ray job submit -- python jobs/train_evaluator.py [--config FILE] [--set key=value ...]`: same as
`raypipe crag train-evaluator`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("crag train-evaluator")
