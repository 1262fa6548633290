"""Profile PyTorch workloads over a grid, one job per grid point:

    python experiments/run.py -m size=64,1024,4096 compile=true,false
"""

import gc
from typing import Any

import hydra
from omegaconf import DictConfig

from experiments import refusals
from experiments.config import register_configs
from experiments.sweep import task


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> Any:
    return task(cfg)


if __name__ == "__main__":
    register_configs()
    refusals.hold()  # until the sweep has started: Hydra's own refusals are rewritten in ours
    try:
        main()
    except SystemExit as exc:
        # Hydra refused the input before the sweep started (it exits 1): say it as we do, exit 2.
        hydra_refused = exc.code == 1 and refusals.holding()
        refusals.release(rephrase=hydra_refused)
        if hydra_refused:
            raise SystemExit(refusals.EXIT_BAD_INPUT) from None
        raise
    finally:
        refusals.release()
        # Everything is written and closed: skip the interpreter's last garbage collection over
        # pandas', matplotlib's and Hydra's objects (about 0.4 s of every sweep's end).
        gc.freeze()
