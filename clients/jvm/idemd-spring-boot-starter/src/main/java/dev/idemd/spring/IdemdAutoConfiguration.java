package dev.idemd.spring;

import dev.idemd.client.IdemdClient;
import dev.idemd.client.RetryPolicy;
import java.time.Duration;
import org.springframework.boot.actuate.health.HealthIndicator;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.ApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;

/**
 * Auto-configuration from {@code idemd.*}, when {@code idemd.url} is set:
 * an {@link IdemdClient} (unless the application defines its own), {@link IdemdFormTokens}, the filter behind
 * {@link Idempotent} in servlet web applications (and its check at start of
 * every {@code @Idempotent} method's subject), and the {@code idemd}
 * health indicator when the actuator is present.
 */
@AutoConfiguration
@EnableConfigurationProperties(IdemdProperties.class)
public class IdemdAutoConfiguration {

    @Bean
    @ConditionalOnMissingBean
    @ConditionalOnProperty(prefix = "idemd", name = "url")
    public IdemdClient idemdClient(IdemdProperties p) {
        return IdemdClient.builder(p.getUrl()).apiKey(p.getApiKey()).timeout(p.getTimeout())
                .retry(new RetryPolicy(Math.max(1, p.getRetryAttempts()), Duration.ofMillis(200),
                        Duration.ofSeconds(5), Duration.ofSeconds(30)))
                .build();
    }

    @Bean
    @ConditionalOnMissingBean
    @ConditionalOnProperty(prefix = "idemd", name = "url")
    public IdemdFormTokens idemdFormTokens(IdemdClient client, IdemdProperties p) {
        return new IdemdFormTokens(client, p);
    }

    /** The filter behind {@link Idempotent}. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
    @ConditionalOnClass(name = "org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerMapping")
    static class WebConfiguration {
        @Bean
        @ConditionalOnProperty(prefix = "idemd", name = "url")
        @ConditionalOnMissingBean(name = "idemdIdempotencyFilter")
        FilterRegistrationBean<IdempotencyFilter> idemdIdempotencyFilter(IdemdClient client, IdemdProperties p,
                ApplicationContext context) {
            FilterRegistrationBean<IdempotencyFilter> r = new FilterRegistrationBean<>(
                    new IdempotencyFilter(client, p, context));
            r.setName("idemdIdempotencyFilter");
            // after Spring Security and the encoding filters, before the dispatcher
            r.setOrder(Ordered.LOWEST_PRECEDENCE - 10);
            return r;
        }

        /** Refuses, at start, an {@link Idempotent} method that could never fill its operation's subject. */
        @Bean
        @ConditionalOnProperty(prefix = "idemd", name = "url")
        @ConditionalOnMissingBean(name = "idemdIdempotentRoutesCheck")
        static IdempotentRoutesCheck idemdIdempotentRoutesCheck(IdemdClient client, ApplicationContext context) {
            return new IdempotentRoutesCheck(client, context);
        }
    }

    /** {@code /actuator/health/idemd}. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(HealthIndicator.class)
    static class HealthConfiguration {
        @Bean(name = "idemdHealthIndicator")
        @ConditionalOnProperty(prefix = "idemd", name = "url")
        @ConditionalOnMissingBean(name = "idemdHealthIndicator")
        HealthIndicator idemdHealthIndicator(IdemdClient client) {
            return new IdemdHealthIndicator(client);
        }
    }
}
