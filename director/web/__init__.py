"""The admin API (Flask), its OpenAPI document and the status page."""
