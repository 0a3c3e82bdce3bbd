"""What stops a step from using an endpoint at all, as opposed to one failed call."""


class EndpointError(RuntimeError):
    """The endpoint cannot serve this step: down, hanging, refusing the key, or without the model.

    `retryable` is False for what waiting cannot fix (a bad key, an unknown model).
    """

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable
