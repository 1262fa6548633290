"""What the job side and the analysis side share: statistics of repeated measurements."""
