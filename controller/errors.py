"""Domain errors; the servicers map each to one gRPC status code."""


class ControllerError(Exception):
    """Base class."""


class NotFound(ControllerError):
    pass


class PermissionDenied(ControllerError):
    pass


class FailedPrecondition(ControllerError):
    pass


class InvalidArgument(ControllerError):
    pass


class Unavailable(ControllerError):
    pass


class ResourceExhausted(ControllerError):
    """New work is refused: the controller's state disk is full."""
