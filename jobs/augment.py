"""`ray job submit -- python jobs/augment.py [--config FILE] [--set key=value ...]`: same as `raypipe augment`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("augment")
