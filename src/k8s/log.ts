/** How the Kubernetes side reports what it did; the webhook turns it into JSON log lines. */
export type Log = (level: 'info' | 'warn' | 'error', msg: string, extra?: object) => void;
