"""Settings of the example project: one PostgreSQL database, shared by Django and cronbase.

DATABASE_URL (a postgresql:// URL or a libpq "key=value" string) says which; the default is a
local database named shop.
"""

import os

from psycopg.conninfo import conninfo_to_dict

_database = conninfo_to_dict(os.environ.get("DATABASE_URL", "dbname=shop"))

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "testserver"]
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.get("dbname", "shop"),
        "USER": _database.get("user", ""),
        "PASSWORD": _database.get("password", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
    }
}

INSTALLED_APPS = [
    "cronbase.contrib.django",
    "shop",
]

# cronbase's App, built on the "default" database: no second URL, no second set of credentials.
CRONBASE = {
    "DATABASE": "default",
    "SCHEMA": "cronbase",
}
