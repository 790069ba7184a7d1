// The checks every declaration shares: each reads one key of an options object, pushes
// what is wrong with it onto `problems` (phrased as the Rust derives phrase it, in the
// key's camelCase name) and returns the value as read, so a declaration lists every
// problem at once instead of stopping at the first.

import { describe, parseDuration } from "./duration.js";

export function optionalDuration(options, key, problems) {
  return options[key] === undefined ? undefined : duration(options, key, problems);
}

export function duration(options, key, problems) {
  try {
    return parseDuration(options[key]);
  } catch (error) {
    problems.push(`\`${key}\`: ${error.message}`);
    return undefined;
  }
}

export function integer(options, key, fallback, min, max, problems, rule = `between ${min} and ${max}`) {
  const value = options[key] ?? fallback;
  if (!Number.isInteger(value) || value < min || value > max) {
    problems.push(`\`${key}\` must be ${rule}, got ${describe(value)}`);
  }
  return value;
}

export function boolean(options, key, fallback, problems) {
  const value = options[key] ?? fallback;
  if (typeof value !== "boolean") problems.push(`\`${key}\` must be true or false, got ${describe(value)}`);
  return value;
}

export function unknownKeys(options, accepted, problems) {
  if (options === null || typeof options !== "object") {
    problems.push(`options must be an object, got ${describe(options)}`);
    return;
  }
  for (const key of Object.keys(options)) {
    if (!accepted.includes(key)) {
      problems.push(`unknown key \`${key}\`${accepted.length ? `; the keys are ${accepted.map((k) => `\`${k}\``).join(", ")}` : ""}`);
    }
  }
}

export function utf8Length(text) {
  return new TextEncoder().encode(text).length;
}
