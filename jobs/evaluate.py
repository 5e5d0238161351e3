"""`ray job submit -- python jobs/evaluate.py [--config FILE] [--set key=value ...]`: same as `raypipe eval`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("eval")
