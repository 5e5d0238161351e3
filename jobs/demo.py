"""`ray job submit -- python jobs/demo.py [--config FILE] [--set key=value ...]`: same as `raypipe demo`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("demo")
