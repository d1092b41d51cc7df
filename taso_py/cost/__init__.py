"""Cost models for the search: the interface (`model`), measured ORT timings, an analytical roofline."""
