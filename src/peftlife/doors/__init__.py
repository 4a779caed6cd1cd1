"""The front doors: the ``peftlife`` command and the pytest plugin."""
