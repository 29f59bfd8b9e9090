import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

/**
 * Webhook signing secrets: `whsec_` + 24 random bytes in base64 (the Standard Webhooks form the `standardwebhooks`
 * package reads). At rest they are sealed with AES-256-GCM when `WEBHOOK_SECRET_KEY` is set (`enc1:` iv, tag and
 * ciphertext, base64url), else stored as they are. Either way no route returns them after creation and no log
 * line carries them.
 */

export const newSecret = () => `whsec_${randomBytes(24).toString('base64')}`;

/** The 32-byte key from its base64 or hex form; throws when it is not 32 bytes. */
export function parseSecretKey(raw: string): Buffer {
  const key = /^[0-9a-f]{64}$/i.test(raw) ? Buffer.from(raw, 'hex') : Buffer.from(raw, 'base64');
  if (key.length !== 32) throw new Error('WEBHOOK_SECRET_KEY must be 32 bytes, in base64 or hex');
  return key;
}

export class SecretBox {
  constructor(private readonly key: Buffer | undefined) {}

  seal(secret: string): string {
    if (!this.key) return secret;
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    const ct = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
    return `enc1:${Buffer.concat([iv, cipher.getAuthTag(), ct]).toString('base64url')}`;
  }

  /** The secret; throws when it was sealed with another key (or none is configured now). */
  open(stored: string): string {
    if (!stored.startsWith('enc1:')) return stored;
    if (!this.key) throw new Error('a webhook secret is sealed but WEBHOOK_SECRET_KEY is not set');
    const raw = Buffer.from(stored.slice(5), 'base64url');
    const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  }
}
