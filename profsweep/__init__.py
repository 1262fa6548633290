"""What the job side, the grid sweeper and the analysis share, none importing another: the artifact
contract, statistics of repeated measurements, and (within a sweep's process) the sweep's state
and its progress lines."""
