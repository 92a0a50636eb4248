"""Makes the repository root importable for the tests when the package is not installed."""
