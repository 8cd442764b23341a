/**
 * Kafka consumers (org.apache.kafka:kafka-clients, an optional dependency of
 * this jar: add it to your application): {@link dev.idemd.client.kafka.KafkaProcessor}
 * claims a poll's records as one batch, runs the handler once per new
 * event, and commits offsets only after idemd stored the outcomes; its
 * {@link org.apache.kafka.clients.consumer.ConsumerRebalanceListener}
 * commits a revoked partition's settled offsets before its new owner starts.
 */
package dev.idemd.client.kafka;
