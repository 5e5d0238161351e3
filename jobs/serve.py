"""`ray job submit -- python jobs/serve.py [--config FILE] [--set key=value ...]`: same as `raypipe serve`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("serve")
