"""MXFNError, the one error mxfn raises for bad input or misuse."""


class MXFNError(ValueError):
    """The error mxfn raises when an argument, option or call order is wrong.

    Python checks and the Rust binding (which imports this class) raise it alike. The
    message names the function, the offending key or value, and the fix, e.g.
    ``module.bind: unknown option "data_shape"; did you mean "data_shapes"?``. It
    subclasses ``ValueError`` so that code catching ``ValueError`` keeps working; a value
    of the wrong Python type raises a plain ``TypeError`` instead.

    Example:
        >>> try:
        ...     raise MXFNError('module.forward: the module is not bound; call bind first')
        ... except ValueError as e:
        ...     print(e)
        module.forward: the module is not bound; call bind first
    """
