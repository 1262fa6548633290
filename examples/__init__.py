"""User workloads, written as a user of profsweep writes them (see the README's "Profile your own model")."""
