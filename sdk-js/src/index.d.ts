// Types of @jobhost/sdk for TypeScript and editors; the contract is in the JS sources'
// comments and docs/javascript.md.

/** A duration in jobhost's grammar: `"500ms"`, `"30s"`, `"2 m"`, `"1d"`; a bare `"30"` is seconds. */
export type Duration = string;

/** A retry policy; `{}` is three attempts, exponential from 1s by 2.0 up to 5m, with jitter. */
export type RetryPolicy =
  | { maxAttempts?: number; backoff: "none" }
  | { maxAttempts?: number; backoff: "fixed"; delay: Duration }
  | {
      maxAttempts?: number;
      backoff?: "exponential";
      base?: Duration;
      factor?: number;
      max?: Duration;
      jitter?: boolean;
    };

export interface QueueOptions {
  /** Unacknowledged deliveries a consumer may hold, 1..=65535; default 16. */
  prefetch?: number;
  /** Default true; a quorum queue is always durable. */
  durable?: boolean;
  queueType?: "classic" | "quorum";
  /** 0..=255, default 10; 0 means no priorities. */
  maxPriority?: number;
  messageTtl?: Duration;
  /** How long one attempt may run, unless the job says otherwise. */
  timeout?: Duration;
  /** The policy of its jobs that have none; none means one attempt and no retries. */
  retry?: RetryPolicy;
  /** At most this many (1..=1000) of its jobs run at once across the fleet. */
  concurrency?: number;
  /** At most this many of its jobs start across the fleet: `"50/s"`, `"10/m"`, `"1000/h"`; at most 1000 a second. */
  rate?: Rate;
  /** With `rate`: jobs saved up after a quiet spell, 1..=10000; default the rate's count. */
  burst?: number;
}

/** `COUNT/UNIT`, the unit `s`, `m` or `h`: `"50/s"`, `"10/m"`, `"1000/h"`. */
export type Rate = `${number}/${"s" | "m" | "h"}`;

export interface Queue {
  readonly kind: "queue";
  readonly name: string;
}

export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";

/** Log fields: an object (or a list of pairs) whose values are shown as strings. */
export type Fields = Record<string, unknown> | [string, unknown][];

/** The delivery being handled, and what a handler may ask of the host. */
export interface JobContext {
  /** UUID v4, the same across every retry of the job. */
  readonly jobId: string;
  readonly jobType: string;
  readonly queue: string;
  /** 1-based attempt number of this delivery. */
  readonly attempt: number;
  /** The effective policy's total attempts. */
  readonly maxAttempts: number;
  /** How many times the job has been deferred. */
  readonly deferrals: number;
  readonly priority: number;
  /** Time since the job was first enqueued. */
  readonly ageMs: number;
  /** Whether a retryable failure now dead-letters the job. */
  isLastAttempt(): boolean;
  log(level: LogLevel, message: string, fields?: Fields): void;
  trace(message: string, fields?: Fields): void;
  debug(message: string, fields?: Fields): void;
  info(message: string, fields?: Fields): void;
  warn(message: string, fields?: Fields): void;
  error(message: string, fields?: Fields): void;
  /**
   * Enqueue a follow-up job (published only if this handler succeeds); returns its id.
   * @throws EnqueueError when refused
   */
  enqueue(jobType: string, payload: unknown, options?: { delayMs?: number }): string;
}

/** A handler: throws a `JobError` (or anything, which is retryable) when the job did not complete. */
export type Handler<P = any> = (payload: P, ctx: JobContext) => void | Promise<void>;

export interface JobOptions<P = any> {
  queue: Queue | string;
  handler: Handler<P>;
  /** Replaces the queue's policy entirely. */
  retry?: RetryPolicy;
  timeout?: Duration;
  /** Turns the parsed JSON into the payload; a throw dead-letters the job as a decode error. */
  decode?: (json: unknown) => P;
  /** At most `limit` (1..=1000) jobs whose payload holds one value under the top-level field `key` run at once, fleet-wide. */
  concurrency?: { key: string; limit: number };
  /**
   * The jobs of one key (without `key`, of the job type as a whole) start at most at `limit`;
   * `burst` 1..=10000, default the count; with `respectRetryAfter`, a job deferred by a
   * service's `Retry-After` (`retryAfter(...)`) holds the key's other jobs back as long.
   */
  rate?: { key?: string; limit: Rate; burst?: number; respectRetryAfter?: boolean };
  /** While a job of one `key` value is queued, held or running (for at most `for`), another enqueue of it is refused. */
  unique?: { key: string; for: Duration };
  /** A periodic job at each match of this cron expression (five fields, or six with seconds first); not with `every`. */
  cron?: string;
  /** The IANA time zone `cron` is read in; default UTC. */
  tz?: string;
  /** A periodic job at every multiple of this period (at least 1s) since the Unix epoch; not with `cron`. */
  every?: Duration;
  /** What each firing's job carries (written as JSON); default `{}`. */
  payload?: unknown;
  /** How many ticks no host fired in time fire late, newest first, 0..=1000; default 0. */
  catchUp?: number;
}

export interface Job {
  readonly kind: "job";
  readonly name: string;
}

export interface Plugin {
  readonly kind: "plugin";
  readonly name: string;
}

export function queue(name: string, options?: QueueOptions): Queue;
export function job<P = any>(name: string, options: JobOptions<P>): Job;
export function plugin(declaration: { name: string; queues: Queue[]; jobs: Job[] }): Plugin;

/** A declaration the SDK refuses, with every problem listed. */
export class DeclarationError extends Error {
  readonly problems: string[];
}

export class JobError extends Error {
  readonly kind: "retryable" | "fatal" | "deferred" | "decode";
  /** Deferrals only. */
  readonly delayMs?: number;
  /** Deferrals only: whether the wait is what a called service asked for. */
  readonly retryAfter?: boolean;
}

export function retryable(message: string): JobError;
export function fatal(message: string): JobError;
/** Run again after `delayMs` without spending an attempt; fatal above `MAX_DELAY_MS`. */
export function deferred(delayMs: number, reason?: string): JobError;
/** A deferral for as long as a called service asked (`Retry-After`). */
export function retryAfter(delayMs: number, reason?: string): JobError;

/** A follow-up the SDK or the host refused. */
export class EnqueueError extends Error {}

/** The longest wait a broker hold queue can hold a job: 2^31 - 1 ms, about 24.8 days. */
export const MAX_DELAY_MS: number;
export function parseDuration(text: Duration): number;

/** Headers: an object, or a list of `[name, value]` pairs (where a name may repeat). */
export type HeadersInit = Record<string, string> | [string, string][];

export interface RequestOptions {
  headers?: HeadersInit;
  /** Sent as it is, with its `content-length`. */
  body?: string | Uint8Array | ArrayBuffer;
  /** Sent as JSON with `content-type: application/json`; not with `body`. */
  json?: unknown;
  /** The longest wait for the response: milliseconds or a duration (`"10s"`); the operator's `request_timeout` bounds it anyway. */
  timeout?: number | Duration;
  /** How many redirects to follow, each a request of its own; default 0 (the redirect is the response). */
  followRedirects?: number;
}

/** A request as sent: what a test's responder sees and `run.requests` records. */
export class Request {
  readonly method: "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "OPTIONS" | "PATCH";
  readonly url: string;
  readonly headers: [string, string][];
  readonly body: Uint8Array;
  readonly timeoutMs: number | undefined;
  /** The first header `name`, ignoring case. */
  header(name: string): string | undefined;
  text(): string;
  json(): any;
}

/** A response: status, headers and the whole body. */
export class Response {
  /** As a test's responder answers. */
  constructor(status: number, parts?: { headers?: HeadersInit; body?: string | Uint8Array | ArrayBuffer; json?: unknown });
  readonly status: number;
  readonly headers: [string, string][];
  readonly body: Uint8Array;
  /** The first header `name`, ignoring case. */
  header(name: string): string | undefined;
  /** The body as UTF-8; throws a TypeError when it is not. */
  text(): string;
  json(): any;
  /**
   * Returns for 2xx; else throws the JobError the status calls for: 429 or 503 with a
   * usable `Retry-After` defers that long (at most `MAX_DELAY_MS`), those without one and
   * other 5xx are retryable, other 4xx and redirects not followed are fatal.
   */
  jobResult(): void;
}

export type HttpErrorKind = "denied" | "timeout" | "connection" | "tooLarge" | "invalid" | "other";

/** A request that got no response; escaping a handler, it fails the job as retryable or fatal by kind. */
export class HttpError extends Error {
  constructor(kind: HttpErrorKind, message: string);
  readonly kind: HttpErrorKind;
  /** Timeouts, failed connections and other host failures; not denials, responses too large or invalid requests. */
  readonly retryable: boolean;
  toJobError(): JobError;
}

/** Outbound HTTP to the origins the operator granted; each call rejects with an `HttpError` when there is no response. */
export interface Http {
  /** The headers a followed redirect carries to another origin. */
  readonly CROSS_ORIGIN_HEADERS: readonly string[];
  get(url: string, options?: RequestOptions): Promise<Response>;
  head(url: string, options?: RequestOptions): Promise<Response>;
  post(url: string, options?: RequestOptions): Promise<Response>;
  put(url: string, options?: RequestOptions): Promise<Response>;
  patch(url: string, options?: RequestOptions): Promise<Response>;
  delete(url: string, options?: RequestOptions): Promise<Response>;
  request(method: string, url: string, options?: RequestOptions): Promise<Response>;
  readonly Request: typeof Request;
  readonly Response: typeof Response;
}
export const http: Http;

/** The plugin's config values and secrets (`[plugins.NAME.config]` and `.secrets` of jobhost.toml). */
export interface Config {
  /** The value, or undefined when the operator set none; throws a retryable JobError when the host cannot read it. */
  get(key: string): string | undefined;
  /** The value; throws a fatal JobError naming the key when the operator set none. */
  require(key: string): string;
}
export const config: Config;
