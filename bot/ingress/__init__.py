"""The HTTP ingress: the FastAPI app, its routes, and the body limits in front of them."""
