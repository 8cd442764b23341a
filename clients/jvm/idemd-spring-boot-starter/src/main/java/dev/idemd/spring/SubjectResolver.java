package dev.idemd.spring;

import jakarta.servlet.http.HttpServletRequest;

/**
 * The subject of a request, for {@code @Idempotent(subject = "bean:NAME")}:
 * a bean of this type named NAME. Its value fills a guarded operation's
 * version key ({@code orders:{subject}}); null or empty answers the request
 * 400 {@code invalid_request}.
 *
 * <pre>{@code
 * @Bean
 * SubjectResolver tenantUser() {
 *     return request -> request.getHeader("X-Tenant") + "/" + request.getRemoteUser();
 * }
 * }</pre>
 */
@FunctionalInterface
public interface SubjectResolver {
    String subject(HttpServletRequest request);
}
