"""The daemon's wiring: ``sixdim serve``, its configuration check, and the parts it builds."""
