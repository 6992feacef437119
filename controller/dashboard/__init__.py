"""The controller's web dashboard: static files served at ``/`` (controller.http_server)."""
