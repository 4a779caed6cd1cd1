"""A finding's reports: the case and its replay, the story, and its renderings.

``case`` is the report file's format; ``story`` the steps every rendering tells;
``terminal``, ``markdown``, ``html`` and ``regression`` render them; ``files``
writes them side by side. ``peftlife.reports`` re-exports the public names.
"""
