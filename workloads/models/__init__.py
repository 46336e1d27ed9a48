"""The model workloads: whole networks' training and inference steps, card and node linearity, and training
to a target accuracy."""
