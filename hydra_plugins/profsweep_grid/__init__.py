"""profsweep's grid sweeper for Hydra (found by Hydra in the hydra_plugins namespace)."""
