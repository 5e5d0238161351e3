"""`ray job submit -- python jobs/import_model.py [--config FILE] [--set key=value ...]`: same as `raypipe models import`."""

from raypipe.cli import job_main

if __name__ == "__main__":
    job_main("models import")
