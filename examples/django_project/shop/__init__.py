"""The example project's shop: orders, and the jobs that confirm and summarize them."""
