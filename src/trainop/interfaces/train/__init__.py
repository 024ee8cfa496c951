"""``trainop train``: the built-in model and data, the training driver, the dashboard and the
TensorFlow replay (``--compare-tf``)."""
