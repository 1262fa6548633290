"""Profile PyTorch workloads over a grid, one job per grid point:

    python experiments/run.py -m size=64,1024,4096 compile=true,false
"""

import hydra
from omegaconf import DictConfig

from experiments.config import register_configs
from experiments.sweep import task


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    task(cfg)


if __name__ == "__main__":
    register_configs()
    main()
