"""The fleet view's one error type, apart so that the command line can catch it without importing the client."""


class FleetError(Exception):
    """What the fleet view cannot do, said so that the operator knows which file, key or server to fix."""
