import pkg from '../../package.json' with { type: 'json' };

/** Recorded in the status annotation so an operator can tell which release patched a Job. */
export const VERSION: string = pkg.version;
