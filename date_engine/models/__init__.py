"""Models of the paper's applications, in plain torch (no torchvision)."""
