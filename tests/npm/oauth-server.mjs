// A real OAuth authorization server for switchyard's end-to-end sign-in test
// (tests/e2e/interop/real_oauth.rs): oidc-provider, configured as MCP authorization asks of one,
// with a sign-in page that needs no person.
//
//   node oauth-server.mjs PORT RESOURCE ACCESS_TOKEN_TTL
//
// - dynamic client registration (RFC 7591), open to anyone;
// - PKCE required for every client (only S256 exists in oidc-provider);
// - resource indicators (RFC 8707): RESOURCE is the only resource it issues tokens for, as JWTs
//   whose audience is RESOURCE and which last ACCESS_TOKEN_TTL seconds; any other resource is
//   refused (invalid_target);
// - refresh tokens for grants that include `offline_access`;
// - the interaction (login, then consent) completes by itself for the user `test-user`, so an
//   HTTP client that follows redirects with cookies is the whole browser.
//
// It prints one JSON line per event on stdout ("listening", each registration, authorization
// and token grant with its grant type), never a token, a code or a secret.

import { Provider, errors } from 'oidc-provider';

const [port, resource, ttlArg] = process.argv.slice(2);
if (!port || !resource || !ttlArg) {
  console.error('usage: node oauth-server.mjs PORT RESOURCE ACCESS_TOKEN_TTL');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const accessTokenTTL = Number(ttlArg);
const scope = 'mcp:tools';
const user = 'test-user';

const say = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

const provider = new Provider(issuer, {
  clients: [],
  // Cookie signing keys: fixed, as this server lives for one test.
  cookies: { keys: ['switchyard-test-cookie-key'] },
  scopes: ['openid', 'offline_access', scope],
  pkce: { required: () => true },
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // No default: a client must name the resource it wants a token for.
      defaultResource: async () => undefined,
      useGrantedResource: async () => false,
      getResourceServerInfo: async (_ctx, indicator) => {
        if (indicator !== resource) {
          throw new errors.InvalidTarget(`this server issues tokens for ${resource} only`);
        }
        return { scope, audience: resource, accessTokenTTL, accessTokenFormat: 'jwt' };
      },
    },
  },
  issueRefreshToken: async (_ctx, client, code) =>
    client.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access'),
  // Refresh tokens outlive the test; the access tokens do not.
  ttl: {
    AccessToken: accessTokenTTL,
    AuthorizationCode: 60,
    Grant: 3600,
    Interaction: 600,
    RefreshToken: 3600,
    Session: 3600,
  },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
});

// The sign-in page: logs `test-user` in, then grants what the client asked for (the scopes and
// the resource's scopes the consent prompt names as missing), and sends the browser on.
provider.use(async (ctx, next) => {
  if (!ctx.path.startsWith('/interaction/') || ctx.method !== 'GET') {
    return next();
  }
  const { req, res } = ctx;
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: user } };
  } else if (prompt.name === 'consent') {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const missing = prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  } else {
    result = { error: 'access_denied', error_description: `no page for the prompt ${prompt.name}` };
  }
  ctx.respond = false;
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
});

provider.on('registration_create.success', (_ctx, client) =>
  say({
    event: 'registration',
    client_id: client.clientId,
    auth_method: client.clientAuthMethod,
    application_type: client.applicationType,
  }),
);
provider.on('authorization.success', (ctx) =>
  say({
    event: 'authorization',
    client_id: ctx.oidc.client?.clientId,
    code_challenge_method: ctx.oidc.params.code_challenge_method,
    resource: ctx.oidc.params.resource,
    scope: ctx.oidc.params.scope,
  }),
);
provider.on('grant.success', (ctx) =>
  say({
    event: 'grant',
    grant_type: ctx.oidc.params.grant_type,
    client_id: ctx.oidc.client?.clientId,
    resource: ctx.oidc.params.resource,
  }),
);
for (const failure of ['grant.error', 'authorization.error', 'registration_create.error', 'server_error']) {
  provider.on(failure, (_ctx, err) =>
    say({ event: failure, error: err.error ?? err.name, description: err.error_description ?? err.message }),
  );
}

provider.listen(Number(port), '127.0.0.1', () => say({ event: 'listening', issuer }));
