"""Self-Reasoning (Xia et al., AAAI 2025) decoding: the method (`method`). Its trajectory layout is
`raypipe.trajectory_format`; its training data comes from the offline job in `raypipe.trajectories`.
"""
