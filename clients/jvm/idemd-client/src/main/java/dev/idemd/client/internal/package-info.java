/**
 * The client's plumbing (its JSON mapper, the checks made before sending):
 * not part of the API, may change in any release. The API is
 * {@code dev.idemd.client}.
 */
package dev.idemd.client.internal;
