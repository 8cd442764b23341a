package dev.idemd.spring;

import jakarta.servlet.http.HttpServletRequest;
import java.security.Principal;
import java.util.Map;
import org.springframework.context.ApplicationContext;
import org.springframework.web.servlet.HandlerMapping;

/** An {@link Idempotent#subject()}, parsed: where a request's subject comes from. */
final class SubjectSource {
    enum Kind { PRINCIPAL, HEADER, PATH, BEAN }

    final Kind kind;
    final String name;

    private SubjectSource(Kind kind, String name) {
        this.kind = kind;
        this.name = name;
    }

    static final String FORMS = "\"principal\", \"header:NAME\", \"path:NAME\" or \"bean:NAME\"";

    /** SPEC parsed; null for an empty one; IllegalArgumentException naming the forms otherwise. */
    static SubjectSource parse(String spec) {
        if (spec == null || spec.isEmpty()) {
            return null;
        }
        if (spec.equals("principal")) {
            return new SubjectSource(Kind.PRINCIPAL, null);
        }
        int colon = spec.indexOf(':');
        String kind = colon < 0 ? spec : spec.substring(0, colon);
        String name = colon < 0 ? "" : spec.substring(colon + 1).trim();
        if (!name.isEmpty()) {
            switch (kind) {
                case "header":
                    return new SubjectSource(Kind.HEADER, name);
                case "path":
                    return new SubjectSource(Kind.PATH, name);
                case "bean":
                    return new SubjectSource(Kind.BEAN, name);
                default:
                    break;
            }
        }
        throw new IllegalArgumentException("subject \"" + spec + "\" is none of " + FORMS);
    }

    /** The subject of REQUEST, or null when it carries none. */
    String resolve(HttpServletRequest request, ApplicationContext context) {
        String v;
        switch (kind) {
            case PRINCIPAL: {
                Principal p = request.getUserPrincipal();
                v = p == null ? null : p.getName();
                break;
            }
            case HEADER:
                v = request.getHeader(name);
                break;
            case PATH: {
                Object vars = request.getAttribute(HandlerMapping.URI_TEMPLATE_VARIABLES_ATTRIBUTE);
                v = vars instanceof Map ? (String) ((Map<?, ?>) vars).get(name) : null;
                break;
            }
            default:
                v = context.getBean(name, SubjectResolver.class).subject(request);
                break;
        }
        return v == null || v.isEmpty() ? null : v;
    }

    /** What a request lacks when it has no subject. */
    String missing() {
        switch (kind) {
            case PRINCIPAL:
                return "the request has no authenticated principal (its subject)";
            case HEADER:
                return "the request has no " + name + " header (its subject)";
            case PATH:
                return "the request's path has no {" + name + "} (its subject)";
            default:
                return "the SubjectResolver bean " + name + " found no subject for the request";
        }
    }
}
