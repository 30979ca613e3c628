"""Database access: connections, named statements, migrations, notifications."""
