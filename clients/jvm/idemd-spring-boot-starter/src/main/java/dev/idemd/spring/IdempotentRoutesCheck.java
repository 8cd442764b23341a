package dev.idemd.spring;

import dev.idemd.client.IdemdClient;
import dev.idemd.client.IdemdException;
import dev.idemd.client.Operation;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.commons.logging.Log;
import org.apache.commons.logging.LogFactory;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.context.ApplicationContext;
import org.springframework.web.method.HandlerMethod;
import org.springframework.web.servlet.mvc.method.RequestMappingInfo;
import org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerMapping;

/**
 * Checks every {@link Idempotent} handler method once the application's
 * beans exist, before the web server takes requests: a subject of none of
 * the known forms, a {@code bean:} subject naming no {@link SubjectResolver},
 * a {@code path:} subject naming no variable of the mapping, and a caller-key
 * method without a subject on an operation that guards a counter by
 * {@code {subject}} (read through the client) stop the application with an
 * {@link IllegalStateException} naming the fix. An operation that does not
 * exist yet, or an idemd that cannot be reached, is not checked.
 */
class IdempotentRoutesCheck implements SmartInitializingSingleton {
    private static final Log LOG = LogFactory.getLog(IdempotentRoutesCheck.class);

    private final IdemdClient client;
    private final ApplicationContext context;

    IdempotentRoutesCheck(IdemdClient client, ApplicationContext context) {
        this.client = client;
        this.context = context;
    }

    @Override
    public void afterSingletonsInstantiated() {
        Map<String, RequestMappingHandlerMapping> mappings = context.getBeansOfType(RequestMappingHandlerMapping.class);
        List<String> refusals = new ArrayList<>();
        Map<String, Operation> policies = new HashMap<>();
        for (RequestMappingHandlerMapping mapping : mappings.values()) {
            for (Map.Entry<RequestMappingInfo, HandlerMethod> e : mapping.getHandlerMethods().entrySet()) {
                Idempotent ann = e.getValue().getMethodAnnotation(Idempotent.class);
                if (ann != null) {
                    String refusal = check(ann, e.getKey(), policies);
                    if (refusal != null) {
                        refusals.add("@Idempotent on " + e.getValue().getShortLogMessage() + " " + e.getKey()
                                + ": " + refusal);
                    }
                }
            }
        }
        if (!refusals.isEmpty()) {
            throw new IllegalStateException("idemd: " + String.join("; ", refusals));
        }
    }

    private String check(Idempotent ann, RequestMappingInfo info, Map<String, Operation> policies) {
        SubjectSource subject;
        try {
            subject = SubjectSource.parse(ann.subject());
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
        if (subject != null && subject.kind == SubjectSource.Kind.BEAN
                && !(context.containsBean(subject.name) && context.isTypeMatch(subject.name, SubjectResolver.class))) {
            return "subject \"" + ann.subject() + "\" names no SubjectResolver bean: define @Bean SubjectResolver "
                    + subject.name + "()";
        }
        if (subject != null && subject.kind == SubjectSource.Kind.PATH && info.getPatternValues().stream()
                .noneMatch(p -> p.contains("{" + subject.name + "}") || p.contains("{" + subject.name + ":"))) {
            return "subject \"" + ann.subject() + "\" names no variable of the path " + info.getPatternValues()
                    + ": add {" + subject.name + "} to the mapping or take the subject from elsewhere";
        }
        if (subject != null || ann.key() == KeySource.TOKEN) {
            return null;
        }
        Operation op = policies.get(ann.operation());
        if (op == null && !policies.containsKey(ann.operation())) {
            try {
                op = client.getOperation(ann.operation());
            } catch (IdemdException e) {
                LOG.info("idemd: operation " + ann.operation() + " not checked (" + e.getMessage() + ")");
            }
            policies.put(ann.operation(), op);
        }
        String vk = op == null ? null : op.versionKey();
        if (vk == null || !vk.contains("{subject}")) {
            return null;
        }
        return "operation " + ann.operation() + " guards the version counter " + vk
                + ", and this method has no subject: set @Idempotent(subject = ...) to " + SubjectSource.FORMS
                + " (the caller's user id, from the principal, a header, a path variable or a SubjectResolver"
                + " bean), or use key = KeySource.TOKEN (a token carries its subject)";
    }
}
