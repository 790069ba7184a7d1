import type { Handler, HttpError, JobError, Request, Response } from "./index.js";

export { HttpError, Request, Response };

/** Answers a request the handler sent: a Response, or a thrown HttpError for no response. */
export type Responder = (request: Request) => Response | Promise<Response>;

/** A delivery to run a handler against natively; setters chain. */
export class TestContext {
  constructor(options?: { config?: Record<string, string>; http?: Responder });
  jobId(id: string): this;
  jobType(name: string): this;
  queue(name: string): this;
  /** The 1-based attempt; raises `maxAttempts` to it when needed. */
  attempt(n: number): this;
  maxAttempts(n: number): this;
  deferrals(n: number): this;
  priority(n: number): this;
  ageMs(ms: number): this;
  /** A config value or secret, as jobhost.toml would give it. */
  config(key: string, value: string): this;
  /** Answers every request; without one, requests fail as not granted. */
  respondWith(responder: Responder): this;
  /** A host that refuses every follow-up with `reason`. */
  refuseFollowUps(reason: string): this;
  run<P>(handler: Handler<P>, payload: P): Promise<Run>;
}

export class Run {
  /** Undefined when the job completed. */
  error: JobError | undefined;
  logs: LogLine[];
  followUps: { id: string; jobType: string; payload: unknown; delayMs: number | undefined }[];
  /** Every request sent, in order; each redirect followed is one of its own. */
  requests: Request[];
  messages(): string[];
}

export class LogLine {
  level: string;
  message: string;
  fields: [string, string][];
  field(key: string): string | undefined;
}
