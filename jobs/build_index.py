"""`ray job submit -- python jobs/build_index.py [--config FILE] [--set key=value ...]`: same as `raypipe index build`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("index build")
