"""One module per `placement` command family; each registers its commands on the app."""
