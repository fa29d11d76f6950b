// A real OpenID provider for Warren's single sign-on tests: oidc-provider (npm, OpenID
// Certified), on a free port of 127.0.0.1, printing `READY <issuer>` once it serves.
//
// What a test controls, over plain HTTP on the same port:
// - POST /test/login?sub=S&claims=JSON  the account that signs in at the next interaction
//   (no login form: the provider finishes login and consent for it at once).
// - POST /test/client?redirect_uri=U    registers one more redirect URI for the client.
// - POST /test/tamper?mode=M            the next ID token is re-signed with one change:
//   `audience` (another client's), `expired`, `signature` (a key the provider does not
//   publish, under the published key's id), `nonce` (another sign-in's).
// - POST /test/rotate                   a new signing key: tokens are signed with it, the
//   JWKS lists it first and the old one after.
// Changing the client or the keys builds the provider anew (sign-ins in flight are lost).
//
// Environment: OIDC_CLIENT_ID, OIDC_CLIENT_SECRET.
import Provider from 'oidc-provider';
import * as jose from 'jose';
import http from 'node:http';

const clientId = process.env.OIDC_CLIENT_ID || 'warren';
const clientSecret = process.env.OIDC_CLIENT_SECRET || 'warren-test-secret';

async function newKey(kid) {
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { jwk: { ...jwk, kid, alg: 'RS256', use: 'sig' }, privateKey };
}

let keys = [await newKey('key-1')];
const foreign = await newKey('foreign');
const redirectUris = [];
const accounts = new Map();
let nextAccount = null;
let tamper = null;
let current = null;
let issuer = null;

function b64json(part) {
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
}

function build() {
  const provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: redirectUris.length ? redirectUris : ['http://127.0.0.1/unused'],
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    jwks: { keys: keys.map((k) => k.jwk) },
    findAccount: async (ctx, id) => accounts.has(id)
      ? { accountId: id, claims: async () => ({ sub: id, ...accounts.get(id) }) }
      : undefined,
    claims: {
      openid: ['sub'],
      profile: ['preferred_username', 'name'],
      email: ['email', 'email_verified'],
      groups: ['groups'],
    },
    scopes: ['openid', 'profile', 'email', 'groups'],
    // The ID token carries the granted scopes' claims (Warren reads them there).
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: false } },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    cookies: { keys: ['warren-test-cookie-key'] },
  });
  provider.proxy = false;
  // The tamper hook: rewrites the next token response's ID token.
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.path !== '/token' || ctx.status !== 200 || !tamper || !ctx.body?.id_token) return;
    const mode = tamper;
    tamper = null;
    const [h, p] = ctx.body.id_token.split('.');
    const header = b64json(h);
    const payload = b64json(p);
    let key = keys[0].privateKey;
    const now = Math.floor(Date.now() / 1000);
    if (mode === 'audience') payload.aud = 'another-client';
    if (mode === 'expired') { payload.iat = now - 7200; payload.exp = now - 3600; }
    if (mode === 'signature') key = foreign.privateKey;
    if (mode === 'nonce') payload.nonce = 'another-sign-in';
    ctx.body = {
      ...ctx.body,
      id_token: await new jose.SignJWT(payload)
        .setProtectedHeader({ alg: header.alg, kid: header.kid, typ: header.typ })
        .sign(key),
    };
  });
  return provider;
}

async function interaction(req, res) {
  const provider = current;
  const details = await provider.interactionDetails(req, res);
  const accountId = nextAccount;
  if (!accountId) {
    res.writeHead(500).end('no account to sign in: POST /test/login first');
    return;
  }
  if (details.prompt.name === 'login') {
    await provider.interactionFinished(req, res, { login: { accountId } },
      { mergeWithLastSubmission: false });
    return;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } },
    { mergeWithLastSubmission: true });
}

const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, issuer);
    if (req.method === 'POST' && url.pathname.startsWith('/test/')) {
      const q = url.searchParams;
      switch (url.pathname) {
        case '/test/login':
          accounts.set(q.get('sub'), JSON.parse(q.get('claims') || '{}'));
          nextAccount = q.get('sub');
          break;
        case '/test/client':
          redirectUris.push(q.get('redirect_uri'));
          current = build();
          break;
        case '/test/tamper':
          tamper = q.get('mode');
          break;
        case '/test/rotate':
          keys = [await newKey(`key-${keys.length + 1}`), ...keys];
          current = build();
          break;
        default:
          res.writeHead(404).end('unknown test endpoint');
          return;
      }
      res.writeHead(204).end();
      return;
    }
    if (url.pathname.startsWith('/interaction/')) {
      await interaction(req, res);
      return;
    }
    current.callback()(req, res);
  } catch (e) {
    console.error(e);
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
});

server.listen(0, '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  current = build();
  console.log(`READY ${issuer}`);
});
process.on('SIGTERM', () => process.exit(0));
// The test's end closes stdin: the provider goes with it even if the test dies.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
