"""The admin API's HTTP server (``server``): Hypercorn and a2wsgi, with the director's guard
between them."""
