"""`ray job submit -- python jobs/self_reasoning_data.py [--config FILE] [--set key=value ...]`: same as
`raypipe self-reasoning data`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("self-reasoning data")
