"""Independent checks of the head adapters: fixtures of every family and a reference forward pass."""
