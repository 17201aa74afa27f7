"""The builders of the shipped models and lists: the KenLM model, the PHI detector, the name lists."""
