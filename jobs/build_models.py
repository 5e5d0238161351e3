"""`ray job submit -- python jobs/build_models.py [--config FILE] [--set key=value ...]`: same as `raypipe models build`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("models build")
