"""koord-descheduler: profiles of Deschedule/Balance plugins, the evictor, PodMigrationJobs."""
