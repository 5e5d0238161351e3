"""`ray job submit -- python jobs/label.py [--config FILE] [--set key=value ...]`: same as `raypipe label`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("label")
