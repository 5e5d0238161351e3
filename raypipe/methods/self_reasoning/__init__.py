"""Self-Reasoning (Xia et al., AAAI 2025): trajectories, teachers, quality control, the method.

Kept free of imports so that `raypipe.training.spans` can read the format module cheaply.
"""
