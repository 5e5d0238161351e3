"""`ray job submit -- python jobs/train.py [--config FILE] [--set key=value ...]`: same as `raypipe train`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("train")
