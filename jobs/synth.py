"""`ray job submit -- python jobs/synth.py [--config FILE] [--set key=value ...]`: same as `raypipe data synth`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("data synth")
