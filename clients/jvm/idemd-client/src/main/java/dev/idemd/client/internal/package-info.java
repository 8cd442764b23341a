/**
 * Internal: not part of the client's API, and may change in any release
 * without notice. The client's plumbing: its JSON mapper ({@code Json}),
 * the reading of idemd's answers into the API's records ({@code Answers}),
 * the problem code to exception table and the parsing of ETag and
 * Retry-After ({@code Problems}), the checks made before sending
 * ({@code Validation}). Its classes are public only because
 * {@code dev.idemd.client} and the starter use them; do not name them in
 * an application. The API is {@code dev.idemd.client}.
 */
package dev.idemd.client.internal;
