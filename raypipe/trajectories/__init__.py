"""Self-Reasoning's training data (Xia et al., AAAI 2025, §"Data Generation and Quality Control"):
the offline job that has a teacher write RAP/EAP/TAP trajectories for retrieved training questions
(`dataset`, `raypipe self-reasoning data`), the teachers (`teachers`: the world's oracle, or any
OpenAI-compatible chat server), the items they answer (`items`), Algorithm 1's quality control
(`quality`) and the long-form eval set (`longform`). The trajectory layout itself is the vocabulary
`raypipe.trajectory_format`; decoding is the method `raypipe.methods.self_reasoning`.
"""
