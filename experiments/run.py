"""Profile PyTorch workloads over a grid, one job per grid point:

    python experiments/run.py -m size=64,1024,4096 compile=true,false
"""

import gc
from typing import Any

import hydra
from omegaconf import DictConfig

from experiments.config import register_configs
from experiments.sweep import task


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Any:
    return task(cfg)


if __name__ == "__main__":
    register_configs()
    try:
        main()
    finally:
        # Everything is written and closed: skip the interpreter's last garbage collection over
        # pandas', matplotlib's and Hydra's objects (about 0.4 s of every sweep's end).
        gc.freeze()
