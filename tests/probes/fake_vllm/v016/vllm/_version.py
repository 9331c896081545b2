__version__ = version = "0.16.0"
