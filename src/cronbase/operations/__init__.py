"""The operator surface: every action an operator takes on jobs, queues and schedules
(audited in the same transaction), and the views they read."""
